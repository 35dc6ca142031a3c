"""Tests of voiced-quantize."""
