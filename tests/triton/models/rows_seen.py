"""OUT[i] = the number of rows of the request the backend got, for every row
i: a caller merged with others sees more rows than it sent."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            rows = np.full((x.shape[0], 1), x.shape[0], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", rows)]))
        return responses
