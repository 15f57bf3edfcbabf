"""The tiny spec the adaptive-sampling tests share: three sensors, one small MLP, so an
ensemble trains in seconds. Each test file adds its own ``train`` and ``adaptive`` sections."""

DATA_AND_MODEL = """\
name: adaptive
data:
  source: {type: synthetic}
  features: [temperature, co2, motion]
  target: occupied
  task: classification
  window: 20
  stride: 20
model: {name: mlp, params: {hidden: 8, layers: 1}}
"""
