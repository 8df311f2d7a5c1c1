"""plateau's Kafka protocol listener: producers point bootstrap.servers at plateau and their
records land in the store, acknowledged as their acks setting promises."""
