"""Training, Keras->ONNX conversion with parity checks, and model artifact folders.

Heavy imports (TensorFlow, tf2onnx) happen inside the modules that need them, so
`python -m export --help` answers at once.
"""
