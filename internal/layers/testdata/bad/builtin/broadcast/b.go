package broadcast
