//! Defects found by the adversarial review of the fleet-wide shared budgets
//! (issue 12): one test per finding, each named after the promise it
//! defends.

/// `RedisConfig`'s `Debug` never shows a password, however the URL carries
/// it: a `redis+unix://` URL takes its credentials from the query
/// (`?user=...&pass=...`), and a configuration is the kind of value that
/// ends up in logs.
#[cfg(feature = "redis")]
#[test]
fn debug_of_a_redis_config_hides_a_password_given_in_the_url_query() {
    use tollgate::shared::RedisConfig;

    for url in [
        "redis+unix:///run/redis.sock?db=0&user=limiter&pass=hunter2",
        "unix:///run/redis.sock?pass=hunter2",
        "redis://limiter:hunter2@10.0.0.1:6379/0",
        "rediss://:hunter2@cache.internal:6380/#hunter2",
    ] {
        let shown = format!("{:?}", RedisConfig::node(url));
        assert!(!shown.contains("hunter2"), "{url} shows as {shown}");
        let shown = format!("{:?}", RedisConfig::cluster([url, url]));
        assert!(!shown.contains("hunter2"), "{url} shows as {shown}");
    }
}
