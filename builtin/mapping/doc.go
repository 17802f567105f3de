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
// # Log mode
//
// Config.WAL (exactly one of the two) keeps the physical queues in the
// catalog; Config.Log keeps them on any wal.Log that is a wal.Sealer —
// in practice runtime/wal/jswal on JetStream. The metadata (topics,
// segments, groups, producer states) stays in the catalog either way;
// the API is the same. What differs is what is atomic:
//
//	                      WAL mode (one catalog commit)      Log mode
//	create/grow           queue created in the commit        queue created on the Log first (ErrExists
//	                                                         is fine); a plan that never commits leaves
//	                                                         an orphan the sweep deletes
//	remap                 seal + new segment in the commit   leader sealed on the Log while planning
//	                                                         (last step), then the commit checks only
//	                                                         the mapping records
//	delete                seal in the commit                 queues deleted after the commit (holds
//	                                                         keep appends waiting meanwhile)
//	producer window       committed with the entries         committed after the append (below)
//	broadcast to N vchans one commit (MultiAppender)         one append per vchannel (Resolver())
//	multi-record append   atomic                             record by record: a seal in the middle
//	                                                         leaves the first part in the closed segment
//	                                                         and the rest goes to the new leader, in
//	                                                         order, possibly after other appends
//
// Offsets. A Log may keep records of its own that take an offset (jswal's
// term fences and seals); reads skip them. The mapping's logic offsets
// stay the segment math (logic = LogicOffset + physical - StartOffset,
// never renumbered), and: (1) a segment's trailing own records are not
// counted — an open leader's max, and a remap's closed end, is one past
// its last entry (dataEnd), not Seal.End, so a remap leaves no gap and a
// retried plan (which finds the queue sealed) computes the same end;
// (2) a new queue is fenced at creation when the Log writes with a term,
// and the segment starts after the fence; (3) an own record in the middle
// of a segment (a new leader's fence after a failover, between two
// appends) is a gap: one logic offset that holds no message. Readers
// follow the offsets reads return: a read from a gap returns the next
// message, Wait waits for a message at or past the offset, every offset
// below max has a message at or after it, and a group offset may point
// at a gap (the next read starts after it).
//
// Appends. Broadcast records get wal.BroadcastRecordID as Record.ID (as
// over wal.LogDirect), the records of a multi-record batch a random batch
// id; an append whose leader turns out sealed refreshes the queue and
// retries with a scan by ID (from the leader's NextHint before the first
// attempt, across segments), so what a Log stored before the seal is
// not appended twice. A leader sealed by a remap whose plan never
// committed makes appends wait up to HoldTimeout and then fail, until a
// remap of the queue commits (the broadcast engine retries the task).
//
// Producers. A producer append's records carry IDs derived from (logic
// queue, producer, seq, index). A producer the catalog does not know gets
// a record first (Low = the queue's max). Unless this process appended
// for the producer since loading its record, the append first looks for
// the records from the record's end (a low-water mark) across the
// segments — the leader fenced first when the Log has a term — and
// appends only what is missing; then the window is committed (checking
// the queue record; a delete range-checks the producer records). A crash
// or failover between the append and that commit leaves records the
// window does not hold: the retry of that seq (at most one is in flight
// per producer and queue) finds them and returns their original
// positions. Limits: the scan costs a read of what was appended to the
// queue since the producer's last append; records retention trimmed
// before the retry are not found and are appended again.
//
// Placement. When the Log can place queues (Placer: jswal's JetStream
// placement tags), a segment's queue is created with its broker's labels
// as "key:value" tags, so a broker labelled az: a lives on servers tagged
// az:a and a policy that spreads over zones spreads over real ones.
//
// Reads and retention read the Log: bounds per segment, OffsetForTime by
// binary search over entry ticks, byte budgets by reading the retained
// entries (wal.RecordSize, as the embedded WAL counts) — one pass per
// retention pass. The orphan sweep lists the Log before reading the
// references and skips queues this process created for plans not yet
// committed, for max(1m, 10×HoldTimeout).
//
// Locking: Mapping.mu guards the topic cache, the remap holds and the
// pending queues; it is never held across a catalog or WAL call. prodMu guards the producer
// table; each producer's mu serializes its appends.
package mapping
