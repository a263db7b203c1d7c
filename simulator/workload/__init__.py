"""Workloads: what a training job computes and communicates (models as layer tables)."""
