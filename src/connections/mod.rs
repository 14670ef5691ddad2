//! Connections: where Redis is and how lockman talks to it. `url` (URLs and TLS), `failure`
//! (typed connection failures), `endpoint` (one server or Sentinel's primary), `cluster`
//! (a Redis Cluster), `command` (the command connections, replica sync), `script_call` (one
//! EVALSHA built in place), `shared_timer` (one response timer for the calls of one task),
//! `subscription`
//! (the pub/sub connection of either) and `tracking` (the connection on which holds are
//! checked, told at once when their keys are written). Nothing here knows the protocol or the actors.

pub(crate) mod cluster;
pub(crate) mod command;
pub(crate) mod endpoint;
pub(crate) mod failure;
pub(crate) mod script_call;
pub(crate) mod shared_timer;
pub(crate) mod subscription;
pub(crate) mod tracking;
pub(crate) mod url;
