"""Tests of the model store, manifests and downloads."""
