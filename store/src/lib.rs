//! `axp-store`: durable sessions, jobs and job logs. Being built under issue 2.
