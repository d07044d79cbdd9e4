"""A ragged model: OUT = [[elements of IN in this request, 1 if the batch
input INDEX reached the backend else 0]]. One answer row per request, as a
ragged batch gives: a merged request is one element count, not one per caller."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            index = pb_utils.get_input_tensor_by_name(r, "INDEX")
            out = np.array([[x.size, 0 if index is None else 1]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
