"""Sleeps the largest value of IN, in milliseconds, then answers OUT = IN."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            time.sleep(max(int(x.max()), 0) / 1000.0)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return responses
