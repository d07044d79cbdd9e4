"""A sequence model: OUT = the running sum of IN over the sequence (its
correlation id); START resets the sum."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            start = int(pb_utils.get_input_tensor_by_name(r, "START").as_numpy().flat[0])
            corrid = int(pb_utils.get_input_tensor_by_name(r, "CORRID").as_numpy().flat[0])
            total = (0 if start else self.sums.get(corrid, 0)) + int(x.sum())
            self.sums[corrid] = total
            out = np.full(x.shape, total, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
