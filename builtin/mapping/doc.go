// Package mapping implements static topics: a fixed number of logic queues
// per topic, each mapped onto a chain of physical-queue segments that a
// remap can move between brokers without moving data. The behaviour is
// specified in docs/design/mapping.md (after RocketMQ static topics);
// this page says how the code does it.
//
// # Model and records
//
// A Topic (mp/t/<topic>) has Queues logic queues and an Epoch bumped by
// every change. Each logic queue (mp/q/<topic>\x00<id BE4>) is an ordered
// list of Segments (gen, broker, queueId, logicOffset, startOffset,
// endOffset, first/last tick); the last one is the open leader. A
// segment's physical queue is the runtime/wal queue "<broker>/<queueId>";
// queue ids come from the persisted sequence "mapping/queue", so a
// physical queue is never reused. The invariants of mapping.md are
// checked by checkTopic on every planned write and on every load (Open
// refuses a catalog that breaks them, with an *InvariantError naming the
// topic, queue and segment). A closed segment is never empty: a remap of
// a queue whose leader holds nothing drops that leader instead, so logic
// offsets strictly increase.
//
// # Changes
//
// Create, grow, remap and delete are Changes. PlanChange computes, from a
// catalog snapshot, the complete batch that applies one (new mapping
// records, wal.CreateOps for new physical queues, wal.SealOps for closed
// leaders, and optimistic checks on everything read). Remap seals the old
// leader at its current end (the seal's check on the WAL meta record
// fails the commit if any append landed after the snapshot), and the new
// segment's logicOffset continues exactly after it: no gap.
//
// In the daemon every change is a broadcast of a built-in message type
// (MessageTypes: topic.create|grow|remap|delete) under the exclusive
// resource key TopicKey(topic). This package cannot import the broadcast
// engine; host/mapping.go adapts it:
//
//	ResourceKeys(c)            → Handler.ResourceKeys
//	m.Validate(ctx, r, c)      → Handler.Validate (runs the policy: bad output is rejected before persist)
//	m.PlanChange(ctx, r, c)    → Handler.Ack: the plan's Ops/Checks become the AckResult,
//	                             committed by the engine with the TOMBSTONE
//	m.Refresh / m.Committed    → called by host after the broadcast finishes
//	DecodeChange(type, payload) decodes the message payload
//
// Apply is the direct path (compute + commit); it is used for the control
// topic at Open and by tests.
//
// # Appends during a remap
//
// Appends go to the cached leader with wal.Append. If a remap sealed it,
// the WAL reports ErrSealed; the mapping reloads the topic and appends to
// the new leader. So an append lands either before the seal (and is inside
// the closed segment, because the seal's end is read in the same
// transaction that checks nothing was appended since), or in the new
// segment — never past a closed end, never lost. While a remap's plan is
// being committed, appends to the moved queues wait (up to HoldTimeout) so
// a stream of appends cannot starve the seal's optimistic check.
//
// # Resolver
//
// *Mapping implements wal.Resolver for the broadcast engine: vchannel
// "topic/N" → leader physical queue; positions carry logic offsets,
// physical queue and offset, and the time tick. The control channel
// "_control/0" is logic queue 0 of topic "_control", created at Open on
// the first broker (by name). Host wiring: host/mapping.go builds the
// Mapping and exposes it as (*host.Host).Resolver(); the broadcast
// engine's Channels is broadcast.ResolverChannels{R: h.Resolver()}.
//
// # Reads, offsets, groups, producers, retention
//
// Read serves a logic queue across segments from one snapshot; offsets
// below min or above max are *RangeError (offset_out_of_range) with min
// and max. LogicToPhysical/PhysicalToLogic translate using the cache;
// TranslateLogic/TranslatePhysical (the API's translate routes) read one
// catalog snapshot and return the segment, broker and both offsets;
// OffsetForTime binary-searches the closed segments' last ticks, then the
// segment by tick. Consumer groups store logic offsets
// (mp/o/<topic>\x00<group>\x00<q>), so remaps never touch them, and a
// topic delete removes the topic's offsets and producer states in its own
// commit (a RangeCheck over the offsets; a group commit checks the queue
// record and waits while a delete or remap holds the queue); Lag and Describe report max−committed, and a
// committed offset below min is reported Expired with the current min.
// The remap broadcast's record in each moved queue is a marker
// (wal.KindMarker, MarkerTypes): it takes a logic offset like any
// message, and readers tell it from data by its kind (the read API shows
// "marker": "remap"; hostd channel read hides it unless --markers).
// AppendOpts with a producer id and sequence stores the producer's last
// ProducerWindow (16) appends — (seq, first offset, count) each — in the
// same commit as the entries (wal.AppendWith), per producer and logic
// queue: a retry of any seq in that window returns its original
// positions (a pipelining producer may retry any of its in-flight
// appends), a seq older than the window or one inside it that was never
// appended is ErrSequence, and seqs must otherwise increase. Records
// written before the window existed hold only the latest append and load
// as a window of one. ApplyRetention (Run calls it every RetentionInterval) trims
// by age and bytes on every physical queue of a logic queue, the open
// leader and the control channel included, drops closed segments whose
// data is gone (optimistic check on the queue record) and deletes
// physical queues no topic references.
//
// Locking: Mapping.mu guards the topic cache and the remap holds; it is
// never held across a catalog or WAL call. prodMu guards the producer
// table; each producer's mu serializes its appends.
package mapping
