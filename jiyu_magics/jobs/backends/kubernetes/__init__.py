"""Runs on Kubernetes (Kubeflow TrainJob or PyTorchJob): manifests, ``kubectl``, the job states
in the lifecycle's words, and the placement that applies, follows and deletes."""
