"""The box's GPU book: one record of GPU leases and of the queue for every Unix user of a
machine, kept by one process (the book keeper, ``keeper``) that alone opens its SQLite file
and learns who asks from the kernel (``SO_PEERCRED`` on its Unix socket), never from the
request. Each user's runs, logs and checkpoints stay in their own ``JIYU_HOME``; the book
holds only what every user may see: who (a Unix user), what kind of run, which GPUs, since
when. Without a box (``location.find()`` is None) leases stay in each home's run store."""
