"""Streaming speech recognition: features, transducer recognizer and stream, search."""
