#!/usr/bin/env python3
"""check_layers.check on small made-up graphs: each rule fires on its fault."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402


class CheckTest(unittest.TestCase):
    def test_a_clean_graph_passes(self):
        edges = {"trellis_loop": {"trellis_learner", "trellis_ledger"},
                 "trellis_learner": {"trellis_model"}}
        libs = {"trellis_loop", "trellis_learner", "trellis_ledger", "trellis_model"}
        self.assertEqual(check_layers.check(libs, edges), [])

    def test_a_link_upward_is_named(self):
        edges = {"trellis_learner": {"trellis_loop"}}
        errors = check_layers.check({"trellis_learner", "trellis_loop"}, edges)
        self.assertEqual(len(errors), 1)
        self.assertIn("trellis_learner (layer 4) links trellis_loop (layer 5)", errors[0])

    def test_grpc_reached_through_another_library_is_named(self):
        edges = {"trellis_run": {"trellis_roles"}, "trellis_roles": {"trellis_verifier_service"},
                 "trellis_verifier_service": {"gRPC::grpc++"}}
        errors = check_layers.check({"trellis_run", "trellis_roles", "trellis_verifier_service"},
                                    edges)
        self.assertTrue(any("trellis_run is a core library but links gRPC" in e for e in errors),
                        errors)

    def test_an_unplaced_library_is_named(self):
        errors = check_layers.check({"trellis_newthing"}, {})
        self.assertEqual(errors, ["trellis_newthing: not placed in a layer "
                                  "(tests/layering/check_layers.py LAYERS)"])


if __name__ == "__main__":
    unittest.main()
