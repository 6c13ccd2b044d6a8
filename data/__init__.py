"""Dataset builders: synthetic generators and real loaders, one module per kind of data."""
