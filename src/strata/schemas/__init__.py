"""JSON Schemas shipped with Strata: ChangeEvent and Snapshot."""
