/** The example app's settings, from the environment. */
export const config = {
  /** The order API's port (0: any free port). */
  port: Number(process.env.PORT ?? 3000),
  /** The payment stand-in's port (0: any free port). */
  paymentsPort: Number(process.env.PAYMENTS_PORT ?? 3001),
  /** Where the checkout workflow reaches the payment service. */
  paymentsUrl: () => process.env.PAYMENTS_URL ?? `http://127.0.0.1:${process.env.PAYMENTS_PORT ?? 3001}`,
  /** The shop's merchant account at the payment service, per tenant. */
  merchant: (tenant: string) => `shop-${tenant}`,
};

export function databaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set (npm start sets it for the processes it starts).');
  return url;
}
