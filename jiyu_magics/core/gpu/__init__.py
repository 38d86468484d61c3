"""The GPUs of this machine, read through NVML only (never a CUDA context): snapshots, who holds
each GPU, GPU-hours, ``CUDA_VISIBLE_DEVICES``, and the doctor's reading of why CUDA does not work."""
