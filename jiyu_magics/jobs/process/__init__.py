"""Processes of a launch: the torchrun command, the child process group, each rank's record,
and stopping a whole process tree."""
