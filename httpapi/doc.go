// Package httpapi serves xrealm's HTTP routes: the ARENA configuration that
// clients read at start (/conf/defaults.json), the token endpoint
// (/user/v2/mqtt_auth) and scene settings (the server registers /healthz
// and /metrics itself). It also resolves the token of a request (Bearer
// header or mqtt_token cookie) for every other route, such as /persist/.
// Its refusals for credentials carry an RFC 6750 Bearer challenge in
// WWW-Authenticate (every 401, and a valid token's 403).
package httpapi
