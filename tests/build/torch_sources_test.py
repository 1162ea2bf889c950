#!/usr/bin/env python3
"""cmake/torch_sources.py on a small made-up tree: which sources get
LibTorch's precompiled header."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cmake"))
import torch_sources  # noqa: E402


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


class TorchSourcesTest(unittest.TestCase):
    def test_direct_and_transitive_includes_count_and_others_do_not(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "m/direct.cc", "#include <torch/torch.h>\n")
            write(root, "m/aten.cc", '#include "m/a.h"\n')
            write(root, "m/a.h", '#pragma once\n#include "m/b.h"\n')
            write(root, "m/b.h", "#pragma once\n  #  include <ATen/Tensor.h>\n")
            write(root, "m/plain.cc", '#include <vector>\n#include "m/c.h"\n#include "gen.pb.h"\n')
            write(root, "m/c.h", '#pragma once\n#include "m/d.h"\n')
            write(root, "m/d.h", '#pragma once\n#include "m/c.h"\n#include <c10_not_torch.h>\n')
            write(root, "build/gen.cc", "#include <torch/torch.h>\n")
            found = torch_sources.torch_sources(root)
        self.assertEqual([os.path.relpath(p, root) for p in found],
                         ["m/aten.cc", "m/direct.cc"])


if __name__ == "__main__":
    unittest.main()
