"""Privacy attacks: re-identification, attribute profiling (classifiers and zero-shot LLM), membership audit."""
