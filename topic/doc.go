// Package topic parses ARENA scene-bus topics, matches MQTT topic filters,
// and maps MQTT topics and filters to NATS subjects and back.
//
// ARENA topics have the form
//
//	{realm}/s/{namespace}/{scene}/{msgType}/{userClient}/{id}[/{toUid}]
//
// with device topics under {realm}/d/... and runtime topics under
// {realm}/g/... . MQTT levels become NATS tokens: "/" becomes ".", the
// wildcards "+" and "#" become "*" and ">", and characters that NATS does
// not allow inside a token are percent-escaped so that the mapping is
// reversible (see ToSubject).
package topic
