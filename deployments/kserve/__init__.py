"""The same model version as a KServe InferenceService (RawDeployment): rendering and offline validation.

`render.py` builds the Seldon rendering (overlay, sizing, pinning, repository API, security) and moves its pod
into a ServingRuntime and an InferenceService, so the two engines share every setting; `validate.py` checks the
result against KServe's own CRD schemas and the rules its controller applies.
"""
