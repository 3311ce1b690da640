"""The interpreter inside the sandbox: its driver script and the frames it speaks."""
