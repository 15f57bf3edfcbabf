"""Spec texts the tests share; line numbers in VALID are relied upon."""

# Line numbers matter: tests assert e.g. that train.epochs is on line 18.
VALID = """\
name: occupancy
description: test spec
data:
  source:
    type: synthetic
    households: 2
  features: [co2, temperature]
  target: occupied
  task: classification
  window: 10
  horizon: 0
  split: {train: 0.6, val: 0.2, test: 0.2}
model:
  name: mlp
  params:
    hidden: 16
train:
  epochs: 2
  batch_size: 32
  optimizer: adam
  learning_rate: 0.01
  num_workers: 2
  resources_per_worker: {CPU: 1}
tracking:
  registration:
    model_name: occupancy
    gate: {metric: val_accuracy, threshold: 0.5, direction: maximize}
"""

MINIMAL = """\
name: tiny
data:
  source: {type: synthetic}
  features: [co2]
  target: occupied
  task: classification
model:
  name: mlp
"""
