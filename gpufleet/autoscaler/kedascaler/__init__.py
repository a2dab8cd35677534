"""KEDA's external scaler (`externalscaler.ExternalScaler`) over gRPC, answered from the
controller's published snapshot: the way to feed KEDA without an APIService."""
