#!/usr/bin/env python3
"""Tests check_doc_paths.py on small made-up repositories in a temp dir."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "check_doc_paths.py")
sys.path.insert(0, HERE)

import check_doc_paths  # noqa: E402


def write(root, path, text=""):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)


class CheckDocPathsTest(unittest.TestCase):

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = self._tmp.name
        write(self.root, "CMakeLists.txt")
        write(self.root, "loop/step.cc")
        write(self.root, "loop/step.h")
        write(self.root, "tests/resume_test.cc")
        write(self.root, "proto/trellis/v1/job.proto")
        write(self.root, "deploy/k8s/README.md", "See `kustomization.yaml`.\n")

    def tearDown(self):
        self._tmp.cleanup()

    def check(self):
        return check_doc_paths.check(self.root)

    def test_missing_path_is_reported_with_file_and_line(self):
        write(self.root, "README.md",
              "# Title\n\nThe loop is `loop/step.cc`.\n"
              "The planner was `loop/planner.h`.\n")
        self.assertEqual(self.check(), ["README.md:4: loop/planner.h"])

    def test_present_paths_pass(self):
        write(self.root, "README.md",
              "`loop/step.cc`, `loop/`, `CMakeLists.txt`, `loop`, and\n"
              "[the step](loop/step.h) all exist.\n")
        self.assertEqual(self.check(), [])

    def test_function_and_line_suffixes_are_stripped(self):
        write(self.root, "docs/a.md",
              "`loop/step.cc::Step`, `loop/step.cc:12`, `loop/step.h:3-9`\n"
              "and `loop/gone.cc::Run`\n")
        self.assertEqual(self.check(), ["docs/a.md:2: loop/gone.cc"])

    def test_links_resolve_from_the_doc_folder(self):
        write(self.root, "docs/a.md",
              "[good](../loop/step.cc) [anchor](#top) [web](https://x.org/a)\n"
              "[bad](loop/step.cc#L3)\n")
        self.assertEqual(self.check(), ["docs/a.md:2: loop/step.cc"])

    def test_outputs_absolute_paths_and_placeholders_are_skipped(self):
        write(self.root, "README.md",
              "`build/trellis` `runs/seed1/job.yaml` `/tmp/x` `/metrics`\n"
              "`OUT/policy.safetensors` `RUN/checkpoints/step_<k>/`\n"
              "`RUN_DIR/report.html` `runs/seedN` `loop/step_N.cc`\n"
              "`loop/*.cc` `web/dashboard.{html,css}` `loop/...`\n"
              "`JOB.yaml` `a/b` `nvidia.com/gpu`\n")
        self.assertEqual(self.check(), [])

    def test_a_source_file_in_a_missing_folder_is_reported(self):
        write(self.root, "README.md", "See `tools/plan.h`.\n")
        self.assertEqual(self.check(), ["README.md:1: tools/plan.h"])

    def test_binary_named_after_its_source_passes(self):
        write(self.root, "README.md",
              "`tests/resume_test` runs; `tests/launch_test` does not.\n")
        self.assertEqual(self.check(), ["README.md:1: tests/launch_test"])

    def test_code_blocks_are_not_read(self):
        write(self.root, "README.md",
              "Text.\n\n    `loop/indented.cc`\n\n"
              "```\n`loop/fenced.cc`\n```\n")
        self.assertEqual(self.check(), [])

    def test_a_wrapped_code_span_reports_the_line_of_the_path(self):
        write(self.root, "README.md",
              "Run `trellis run JOB.yaml\n--override loop/none.yaml` now.\n")
        self.assertEqual(self.check(), ["README.md:2: loop/none.yaml"])

    def test_command_words_and_values_are_checked(self):
        write(self.root, "README.md",
              "`X=1 loop/step.cc --config command=loop/none.py`\n")
        self.assertEqual(self.check(), ["README.md:1: loop/none.py"])

    def test_proto_import_paths_and_folder_relative_names(self):
        write(self.root, "docs/a.md",
              "It imports `trellis/v1/job.proto`, not `trellis/v1/x.proto`.\n")
        write(self.root, "deploy/README.md",
              "`k8s/README.md` is here, `k8s/gone.md` is not.\n")
        self.assertEqual(self.check(), [
            "docs/a.md:1: trellis/v1/x.proto",
            "deploy/README.md:1: k8s/gone.md",
        ])

    def test_only_the_named_docs_are_read(self):
        write(self.root, "loop/README.md", "`loop/gone.cc`\n")
        write(self.root, "docs/sub/a.md", "`loop/gone.cc`\n")
        self.assertEqual(self.check(), [])

    def test_the_command_fails_listing_each_missing_path(self):
        write(self.root, "README.md", "`loop/step.cc`\n`loop/gone.cc`\n")
        write(self.root, "ledger/README.md", "[x](../loop/none.h)\n")
        run = subprocess.run([sys.executable, SCRIPT, self.root],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        self.assertEqual(run.returncode, 1)
        self.assertEqual(run.stdout.splitlines(), [
            "README.md:2: loop/gone.cc",
            "ledger/README.md:1: ../loop/none.h",
        ])
        self.assertIn("2 path(s)", run.stderr)

    def test_the_command_passes_when_every_path_exists(self):
        write(self.root, "README.md", "`loop/step.cc`\n")
        run = subprocess.run([sys.executable, SCRIPT, self.root],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        self.assertEqual((run.returncode, run.stdout), (0, ""))


if __name__ == "__main__":
    unittest.main()
