"""The key lifecycle: rotation, the horizons of backups and retention, backup and restore."""
