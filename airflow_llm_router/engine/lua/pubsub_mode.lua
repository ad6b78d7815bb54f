-- Which pub/sub the events go out on: 1 sharded (SPUBLISH, Redis 7+), 0 plain (PUBLISH).
-- Listeners subscribe to match (SSUBSCRIBE or SUBSCRIBE).
return SHARDED and 1 or 0
