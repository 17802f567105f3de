// Package tracing measures what tracing costs a broadcast: hostd in-process
// (default config, Badger with fsynced commits, the HTTP API) runs the same
// broadcast load with telemetry.traces.exporter "none" and "file" (the
// default: every span written to <data dir>/traces/spans.jsonl as it ends),
// alternating rounds in one run so machine noise hits both alike, and
// reports the throughput ratio. The target (issue 7) is at most 10% loss.
//
// TestReport is what `make bench` runs: both daemons at the same time for
// 3 rounds of 2 s (HOSTD_LONG=1: 5 of 5 s), the ratio file/none as the
// report's row with the target, and for a miss the measured reason (spans
// and bytes per broadcast, the CPU a span written to the file costs over
// one not exported, its share of a broadcast's CPU).
//
//	cd bench && go test ./tracing -run TestReport -v                  # the report's rows
//	cd bench && go test ./tracing -run XXX -bench AB -benchtime 1x   # the A/B ratio
//	cd bench && go test ./tracing -run XXX -bench . -benchtime 1s    # everything
//
// BenchmarkBroadcastTracingAB runs both daemons at the same time (so the
// rest of the machine's load falls on both alike) and reports file/none of
// completed broadcasts — the number to read on a shared machine.
// BenchmarkBroadcastTracing runs them in alternating rounds and prints
// broadcasts/s and process CPU per broadcast for each, and the ratios; BenchmarkSpanExport measures one span start+end
// through the file exporter against a recorder-less provider (the raw cost
// per span). A broadcast makes about six spans (request, create, a send per
// vchannel, process broadcast).
package tracing
