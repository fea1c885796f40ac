// Package registry holds predicted hot keys: events that operators register ahead (a
// match at 19:30, a noon sale, a creator who posts every evening) with key patterns, a
// time window that may repeat, a lead time and expected rates, so that mitigations are
// armed before the spike; and it compares those predictions with what detection saw.
//
// The parts:
//
//   - Event: the JSON contract of GET|POST /v1/registry and GET|PUT|DELETE
//     /v1/registry/{id}, with DecodeEvent and Validate, whose errors name the field.
//   - Pattern and MatchGlob: exact keys, prefixes and Redis-style globs, matched like
//     Redis's KEYS and SCAN MATCH, without allocating.
//   - Schedule and Cron: occurrences of one-off, daily, weekly and cron events in an IANA
//     zone, defined across DST changes; whether an event is armed at a given time.
//   - Store and its implementations: Memory, FileStore (one JSON document written
//     atomically, locked by one store at a time, keeping the events it cannot read),
//     RedisStore (shared by a fleet), Mirror (a RedisStore with the agent's local copy,
//     written back when Redis loses the registry), Static (read-only events of the config
//     file), Merged, and Switch (hands calls to a store it can replace while in use: an
//     agent whose Redis did not answer at start moves there once it does); Seed copies
//     one store into another. A store holds at most MaxEvents events.
//   - Index: which armed events predict a key at a given time.
//   - Tracker: observed against expected peaks per event, hot keys under each event, and
//     surprises (hot keys no event predicted).
//
// Everything that depends on time is pure and takes now as an argument. Schedule, Index
// and Static are immutable and safe for concurrent use; Memory, FileStore, RedisStore,
// Mirror, Merged, Switch and Tracker are safe for concurrent use and say what their
// mutexes guard.
// docs/registry.md describes the event format, the timeline and the report.
package registry
