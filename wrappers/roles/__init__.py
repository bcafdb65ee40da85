"""The roles of a graph split across pods (`render --split cpu-gpu`): a pod's role served (`serve`), and the
CPU stages served on their own (`stages`)."""
