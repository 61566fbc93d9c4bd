"""_feature_engine (in progress)."""
