"""OUT = IN + the request's x-tenant parameter (0 without one): Triton makes
it a parameter from the caller's X-Tenant header (--http-header-forward-pattern,
--grpc-header-forward-pattern), keeping the header's case."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            params = {k.lower(): v for k, v in json.loads(r.parameters()).items()}
            tenant = int(params.get("x-tenant", 0))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x + tenant).astype(x.dtype))]))
        return responses
