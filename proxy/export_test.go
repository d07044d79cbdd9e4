package proxy

// SetTestHookInfer makes f run in infer once a batched model's body is
// read (tests make it panic) until the returned function is called.
func SetTestHookInfer(f func(model string, body []byte)) (restore func()) {
	testHookInfer.Store(&f)
	return func() { testHookInfer.Store(nil) }
}

// SetTestHookLaneWait makes f run when a large body starts waiting for a
// turn of the large-body lane, until the returned function is called.
func SetTestHookLaneWait(f func()) (restore func()) {
	testHookLaneWait.Store(&f)
	return func() { testHookLaneWait.Store(nil) }
}

// SetLargeBodyPool turns the pooling of large body buffers off (the
// baseline of BenchmarkLargeBody) or on until the returned function.
func SetLargeBodyPool(on bool) (restore func()) {
	testNoLargePool.Store(!on)
	return func() { testNoLargePool.Store(false) }
}
