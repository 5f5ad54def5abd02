"""Adapters from training frameworks' own callback events to gradlog's step driver; each
module imports its framework only when used."""
