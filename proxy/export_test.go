package proxy

// SetTestHookInfer makes f run in infer once a batched model's body is
// read (tests make it panic) until the returned function is called.
func SetTestHookInfer(f func(model string, body []byte)) (restore func()) {
	testHookInfer.Store(&f)
	return func() { testHookInfer.Store(nil) }
}
