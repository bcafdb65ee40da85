"""SeldonDeployment + autoscaling manifests: render for one model version, validate, apply."""
