// Anchor for the precompiled LibTorch header shared by all torch targets.
