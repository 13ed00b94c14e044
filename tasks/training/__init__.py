"""Downstream and attack classifiers (shared by utility and profiling) and their task metrics."""

from tasks.training.classifiers import (
    EncoderClassifier,
    LinearTextClassifier,
    TrainingDataError,
    prepare_labelled,
)

__all__ = ["EncoderClassifier", "LinearTextClassifier", "TrainingDataError", "prepare_labelled"]
