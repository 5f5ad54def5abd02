"""Small utilities shared by the engine, modules and optimizers."""
