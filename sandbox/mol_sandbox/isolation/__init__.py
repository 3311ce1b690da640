"""What keeps a session in: the bubblewrap command line, its cgroups and its process."""
