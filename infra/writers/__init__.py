"""Artifact writers: every module here registers one or more writers with `@artifact`."""
