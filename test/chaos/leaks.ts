/**
 * What an error answer must never carry: the database driver's words, SQL,
 * stepkey's or graphile-worker's internals, or the caller's data (the load's
 * emails are all @example.com). A 5xx that matches quoted something it got
 * from below instead of answering for itself.
 */
const leak =
  /too many clients|remaining connection slots|terminating connection|administrator command|the database system is|connection (?:closed|ended|refused|terminated|timeout)|CONNECTION_[A-Z_]+|ECONN[A-Z]+|EPIPE|ETIMEDOUT|SQLSTATE|\b(?:select|insert into|update \S+ set|delete from)\b|stepkey\.ledger|graphile_worker|postgres|@example\.com|\b(?:57P0\d|53300|08[0-9P]\d\d)\b/i;

export const leaksInternals = (body: string) => leak.test(body);
