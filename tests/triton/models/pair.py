"""SUM = A + B per request (two inputs, for calls with one in shared memory)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "B").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", a + b)]))
        return responses
