"""Suite-wide test settings: one hypothesis profile (no deadline: the first example of a test
pays for imports and warm-up, which says nothing about the code under test)."""

from hypothesis import settings

settings.register_profile("gradlog", deadline=None, max_examples=30)
settings.load_profile("gradlog")
