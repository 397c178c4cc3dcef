// Package campaignq runs the blocks of a paired campaign (ovrun bench,
// ovtrace ab) on many machines through NATS JetStream.
//
// A campaign publishes each counterbalanced block as one work item (Item)
// to the stream BlocksStream, on the subject of its requirement class
// (Labels, e.g. device=NPU,driver=X): one subject and one durable pull
// consumer per class, since a work-queue stream refuses consumers whose
// filters overlap. A worker (Work) pulls only from the consumers whose
// requirements its own labels meet, runs the whole block on its machine
// (warm-ups included: pairs are never split across machines), heartbeats
// the message while it runs, and then commits the block in two steps: the
// result files as one object named by campaign, class, block and delivery
// (ResultsStore), then a Record under the block's key in DoneBucket,
// created only if the key does not exist yet. The key is the commit: the
// first completed delivery wins, the object of any other delivery (a
// worker killed mid-block and redelivered elsewhere, or a slow one whose
// block timed out) is never referenced, and so a block is counted exactly
// once. Only then is the message acknowledged; a redelivered message whose
// key exists is acknowledged without running.
//
// The campaign side (Drive) watches DoneBucket for its keys, fetches each
// committed object into its output folder through a Sink, and hears from
// JetStream's max-deliveries advisory about blocks given up.
package campaignq
