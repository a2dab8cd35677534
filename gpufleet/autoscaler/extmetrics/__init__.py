"""The `external.metrics.k8s.io/v1beta1` API server: HTTPS, delegated authentication and
authorization, answered from the controller's published snapshot."""
