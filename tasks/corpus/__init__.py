"""Corpus schema, validation, importers, public datasets and splits."""
