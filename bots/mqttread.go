package bots

import (
	"time"

	"github.com/xrealm/xrealm/mqttwire"
	"github.com/xrealm/xrealm/streamread"
)

// DefaultMaxPacket is the largest MQTT packet a client accepts unless
// MQTTConfig.MaxPacket says otherwise.
const DefaultMaxPacket = 16 << 20

// readPacket reads from the connection until one packet is complete and
// returns it. It is for the handshake; receive takes over the buffer
// afterwards.
func (c *MQTTClient) readPacket() (byte, []byte, error) {
	return mqttwire.ReadPacket(c.nc, c.rd)
}

// receive reads until the connection fails, handing every complete packet
// to handle with the time of the read that completed it.
func (c *MQTTClient) receive() error {
	if err := c.drain(); err != nil {
		return err
	}
	return streamread.Receive(c.nc, &c.rd.Buffer, streamread.Options{Stop: c.closing.Load}, c.drain)
}

// drain handles every complete packet in the buffer, with the time of the
// read that brought them.
func (c *MQTTClient) drain() error {
	at := time.Now().UnixNano()
	c.lastRead.Store(at)
	c.handling.Store(true)
	for {
		first, body, ok, err := c.rd.Next()
		if err != nil || !ok {
			if c.cfg.OnReadEnd != nil {
				c.cfg.OnReadEnd()
			}
			c.handling.Store(false)
			return err
		}
		if err := c.handle(first, body, at); err != nil {
			c.handling.Store(false)
			return err
		}
	}
}
