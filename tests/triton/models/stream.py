"""Decoupled: for a request (COUNT, INTERVAL_MS) sends COUNT answers OUT = 0,
1, ..., one every INTERVAL_MS milliseconds, then the final flag."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            count = int(pb_utils.get_input_tensor_by_name(r, "COUNT").as_numpy().flat[0])
            interval = int(pb_utils.get_input_tensor_by_name(r, "INTERVAL_MS").as_numpy().flat[0]) / 1000.0
            sender = r.get_response_sender()
            for i in range(count):
                time.sleep(interval)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
