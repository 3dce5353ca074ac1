"""The fleet: a variant's nodes, their launch files, the .env they read, and docker on each."""
