// Package auth issues and verifies xrealm's access tokens and decides what a
// token allows.
//
// Tokens are JWTs signed with ES256 by a key kept in the data directory. Their
// claims follow ARENA: sub (the user name), exp, and publ/subs, lists of MQTT
// topic filters the holder may publish to and subscribe to. xrealm adds evts:
// filters where the holder may publish only clientEvent messages (a viewer's
// clicks), so that viewers can interact without being able to edit.
//
// Scene settings (roles and public flags) decide which role a user gets when
// a token is requested for a scene; Rights turns a role into filters.
package auth
