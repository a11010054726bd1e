#include "cluster/redis_scripts.h"

namespace kvroute::cluster {

// Residency admission, atomic because Redis runs a script to completion.
// KEYS[1]: the instance's reservations (reservation id ->
// "owner:tokens:serial:reserved at, ms:turns", turns: the reservations made
// under the id since it was new, this one included); KEYS[2]: the turns waiting for
// room on it (reservation id -> "owner:tokens:first refused at, ms:place
// kept until, ms"). ARGV: lease key prefix ("kvroute:replica:"), owner,
// reservation id, tokens, fill, serial, now (ms), force ("1"), how long a
// refused turn's place is kept (ms), then (reservation id, serial) pairs of
// this owner's releases queued for the instance, applied first as the
// release script does. Returns {1 admitted, 0 refused, -1 the owner's own
// lease is missing (its entry would be dropped by the next caller, so it
// must not be made); the reserved tokens after; the entries evicted; 1 if a
// live entry was held under the id already; the tokens of the turns waiting
// ahead of it; the turns reserved under the id before this one since it was
// new (0 for a new one): a resident session's turns across replicas, which
// its residency quantum counts}.
// Entries whose owner's lease is gone, or that do not parse, are dropped on
// the way, and waiting turns that stopped asking; an entry under the same
// reservation id is replaced, so it does not count against itself, and is
// admitted whatever the others hold: it is a resident session's next turn,
// which the local gate admits at once too (its footprint grows with its
// context). A new one goes first come, first served, as in one gate: it is
// admitted only if it fits beside the turns that were refused before it
// (their place kept while they ask again), else it takes its place behind
// them. Forced, the others are evicted the least recently reserved first
// until this one fits.
const char kReserveScript[] = R"lua(
local lease_prefix, owner, id = ARGV[1], ARGV[2], ARGV[3]
local tokens, fill = tonumber(ARGV[4]), tonumber(ARGV[5])
local now, keep = tonumber(ARGV[7]), tonumber(ARGV[9])
if redis.call('EXISTS', lease_prefix .. owner) == 0 then return {-1, 0, 0, 0, 0, 0} end
for i = 10, #ARGV - 1, 2 do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local who, _, serial = string.match(v, '^(.*):(%d+):(%d+):%d+:%d+$')
    if who == owner and serial == ARGV[i + 1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
  end
end
local entries = redis.call('HGETALL', KEYS[1])
local alive = {[owner] = true}
local sum = 0
local others = {}
local held, turns = 0, 0
for i = 1, #entries, 2 do
  local who, n, _, at, t = string.match(entries[i + 1], '^(.*):(%d+):(%d+):(%d+):(%d+)$')
  if who == nil then
    redis.call('HDEL', KEYS[1], entries[i])
  else
    if alive[who] == nil then
      alive[who] = redis.call('EXISTS', lease_prefix .. who) == 1
    end
    if not alive[who] then
      redis.call('HDEL', KEYS[1], entries[i])
    elseif entries[i] ~= id then
      sum = sum + tonumber(n)
      table.insert(others, {entries[i], tonumber(n), tonumber(at)})
    else
      held, turns = 1, tonumber(t)
    end
  end
end
local since, ahead = now, 0
if held == 0 then
  local waiting = redis.call('HGETALL', KEYS[2])
  local live = {}
  for i = 1, #waiting, 2 do
    local who, n, first, kept = string.match(waiting[i + 1], '^(.*):(%d+):(%d+):(%d+)$')
    if who ~= nil and alive[who] == nil then
      alive[who] = redis.call('EXISTS', lease_prefix .. who) == 1
    end
    if who == nil or tonumber(kept) < now or not alive[who] then
      redis.call('HDEL', KEYS[2], waiting[i])
    elseif waiting[i] == id then
      since = tonumber(first)
    else
      table.insert(live, {waiting[i], tonumber(n), tonumber(first)})
    end
  end
  for _, w in ipairs(live) do
    if w[3] < since or (w[3] == since and w[1] < id) then ahead = ahead + w[2] end
  end
end
local evicted = 0
if held == 0 and ((sum > 0 and sum + tokens > fill) or (ahead > 0 and sum + ahead + tokens > fill)) then
  if ARGV[8] ~= '1' then
    redis.call('HSET', KEYS[2], id, owner .. ':' .. tokens .. ':' .. since .. ':' .. (now + keep))
    return {0, sum, 0, 0, ahead, 0}
  end
  table.sort(others, function(x, y) return x[3] < y[3] end)
  for _, o in ipairs(others) do
    if sum + tokens <= fill then break end
    redis.call('HDEL', KEYS[1], o[1])
    sum = sum - o[2]
    evicted = evicted + 1
  end
end
redis.call('HDEL', KEYS[2], id)
redis.call('HSET', KEYS[1], id,
  owner .. ':' .. tokens .. ':' .. ARGV[6] .. ':' .. ARGV[7] .. ':' .. (turns + 1))
return {1, sum + tokens, evicted, held, ahead, turns}
)lua";

// Release: deletes the entry only if this replica made it with this serial
// (it may have reserved it again since, or another replica taken it over).
// KEYS[1]: the instance's reservations; ARGV: owner, reservation id, serial.
const char kReleaseScript[] = R"lua(
local v = redis.call('HGET', KEYS[1], ARGV[2])
if v then
  local who, _, serial = string.match(v, '^(.*):(%d+):(%d+):%d+:%d+$')
  if who == ARGV[1] and serial == ARGV[3] then
    return redis.call('HDEL', KEYS[1], ARGV[2])
  end
end
return 0
)lua";

// The pull: every live replica's id, load and rates in one round trip; ids
// whose lease expired leave the set here (atomically, so a replica renewing
// its lease at the same moment is not removed). KEYS[1]: the replica set;
// ARGV: key prefix ("kvroute:"), the most replicas to return.
const char kPullScript[] = R"lua(
local prefix, most = ARGV[1], tonumber(ARGV[2])
local out = {}
local live = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', prefix .. 'replica:' .. id) == 1 then
    live = live + 1
    if live <= most then
      table.insert(out, id)
      table.insert(out, redis.call('HGETALL', prefix .. 'load:' .. id))
      table.insert(out, redis.call('HGETALL', prefix .. 'rates:' .. id))
    end
  else
    redis.call('SREM', KEYS[1], id)
  end
end
table.insert(out, live)
return out
)lua";

}  // namespace kvroute::cluster
