"""OUT = IN + 1 per request; a request whose IN holds the sentinel -1 gets a
per-request TritonError (HTTP 500 for that request only)."""

import numpy as np
import triton_python_backend_utils as pb_utils

SENTINEL = -1


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if (x == SENTINEL).any():
                err = pb_utils.TritonError(f"IN holds the sentinel {SENTINEL}")
                responses.append(pb_utils.InferenceResponse(error=err))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x + 1).astype(x.dtype))]))
        return responses
